// The plugin's own intra-op threads: a process-wide pool of workers that spin briefly after each
// job and then sleep, so back-to-back kernels hand out work in about a microsecond, with no
// Python thread, no GIL and no future involved (the core's pool costs tens of microseconds per
// call, which a 300-microsecond convolution split in two cannot afford).
//
// run(n, threads, fn) calls fn(i) for every i in [0, n) on the calling thread and up to
// threads - 1 workers, items claimed one by one from an atomic counter; it returns when all are
// done.  Which thread runs which item never changes an item's arithmetic, so results do not
// depend on the thread count.  One job runs at a time: a caller that finds the pool busy (two
// sessions running at once) runs its items itself.  Included by the binding files only (not
// by the per-ISA kernel files).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define GRAPHRT_PAUSE() _mm_pause()
#else
#define GRAPHRT_PAUSE() std::this_thread::yield()
#endif

namespace graphrt_simd {

class NativePool {
public:
    // The pool of this process, created on first use and never destroyed: its workers may still
    // be waiting when the interpreter exits.
    static NativePool& get() {
        static NativePool* pool = new NativePool();
        return *pool;
    }

    void run(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
        if (n <= 0) return;
        if (threads > kMaxThreads) threads = kMaxThreads;  // never thousands of workers
        std::unique_lock<std::mutex> busy(job_mutex_, std::try_to_lock);
        if (threads <= 1 || n == 1 || !busy.owns_lock()) {
            for (int64_t i = 0; i < n; ++i) fn(i);
            return;
        }
        ensure_workers(threads - 1);
        Job job(n, &fn);
        wanted_.store(threads - 1);
        job_.store(&job);
        {
            std::lock_guard<std::mutex> lock(sleep_mutex_);
            epoch_.fetch_add(1);
        }
        sleep_cv_.notify_all();
        work(job);
        while (job.done.load() < n) GRAPHRT_PAUSE();
        job_.store(nullptr);                   // no worker enters after this ...
        while (inside_.load() != 0) GRAPHRT_PAUSE();  // ... and none is still inside
        if (job.error) std::rethrow_exception(job.error);
    }

private:
    struct Job {
        Job(int64_t count, const std::function<void(int64_t)>* f) : n(count), fn(f) {}
        int64_t n;
        const std::function<void(int64_t)>* fn;
        std::atomic<int64_t> next{0};
        std::atomic<int64_t> done{0};
        std::exception_ptr error;
        std::mutex error_mutex;
    };

    NativePool() : pid_(getpid()) {}

    static void work(Job& job) {
        for (int64_t i = job.next.fetch_add(1); i < job.n; i = job.next.fetch_add(1)) {
            try {
                (*job.fn)(i);
            } catch (...) {
                std::lock_guard<std::mutex> lock(job.error_mutex);
                if (!job.error) job.error = std::current_exception();
            }
            job.done.fetch_add(1);
        }
    }

    void ensure_workers(int count) {
        if (getpid() != pid_) {  // a forked child: the parent's workers do not exist here
            pid_ = getpid();
            started_ = 0;
        }
        while (started_ < count) {
            const int index = started_++;
            // detached and never joined: a worker sleeps on the pool, which is never destroyed
            std::thread([this, index] { loop(index); }).detach();
        }
    }

    void loop(int index) {
        uint64_t seen = epoch_.load();
        for (;;) {
            // spin a little for the next job (kernels of one run follow each other closely)
            bool fresh = false;
            for (int spin = 0; spin < kSpins; ++spin) {
                if (epoch_.load(std::memory_order_relaxed) != seen) {
                    fresh = true;
                    break;
                }
                GRAPHRT_PAUSE();
            }
            if (!fresh) {
                std::unique_lock<std::mutex> lock(sleep_mutex_);
                sleep_cv_.wait(lock, [&] { return epoch_.load() != seen; });
            }
            seen = epoch_.load();
            if (index >= wanted_.load()) continue;
            inside_.fetch_add(1);  // before reading job_: see run()
            Job* job = job_.load();
            if (job != nullptr) work(*job);
            inside_.fetch_sub(1);
        }
    }

    static constexpr int kMaxThreads = 256;  // binding.h's MAX_NATIVE_THREADS
    static constexpr int kSpins = 1 << 14;  // about 0.1-0.3 ms of pause instructions

    std::mutex job_mutex_;
    std::mutex sleep_mutex_;
    std::condition_variable sleep_cv_;
    std::atomic<uint64_t> epoch_{0};
    std::atomic<Job*> job_{nullptr};
    std::atomic<int> inside_{0};
    std::atomic<int> wanted_{0};
    int started_ = 0;
    pid_t pid_;
};

}  // namespace graphrt_simd
