// The plugin's own intra-op threads: a process-wide pool of workers that spin briefly after each
// job and then sleep, so back-to-back kernels hand out work in about a microsecond, with no
// Python thread, no GIL and no future involved (the core's pool costs tens of microseconds per
// call, which a 300-microsecond convolution split in two cannot afford).
//
// run(n, threads, fn) calls fn(i) for every i in [0, n) on the calling thread and up to
// min(threads, n) - 1 workers, items claimed one by one from an atomic counter; it returns when
// all are done.  Only those workers are woken (each sleeps on its own condition variable): a
// call of 4 items with threads = 256 wakes 3, not the 255 an earlier call may have started.
// Which thread runs which item never changes an item's arithmetic, so results do not depend on
// the thread count.  One job runs at a time: a caller that finds the pool busy (two
// sessions running at once) runs its items itself.  Included by the binding files only (not
// by the per-ISA kernel files).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include <pthread.h>

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
        // the caller takes items too: more than n - 1 workers would find none left
        const int helpers = static_cast<int>(std::min<int64_t>(threads - 1, n - 1));
        ensure_workers(helpers);
        Job job(n, &fn);
        wanted_.store(helpers);
        job_.store(&job);
        {
            std::lock_guard<std::mutex> lock(sleep_mutex_);
            epoch_.fetch_add(1);
        }
        for (int i = 0; i < helpers; ++i) wake_[i].notify_one();  // the others sleep on
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

    NativePool() {
        instance_ = this;
        pthread_atfork(nullptr, nullptr, &NativePool::after_fork);
    }

    // In a forked child only the forking thread exists, yet the copied state still counts the
    // parent's workers: started, inside a job (run() would wait for them forever), waiting on
    // a condition variable (glibc's broadcast then waits for them to leave: the child hung) or
    // holding a mutex.  The child starts over with fresh ones and no workers (run() starts
    // them); the old objects are abandoned, not destroyed, as their waiters never return.
    static void after_fork() {
        NativePool& pool = *instance_;
        new (&pool.job_mutex_) std::mutex();
        new (&pool.sleep_mutex_) std::mutex();
        for (std::condition_variable& cv : pool.wake_) new (&cv) std::condition_variable();
        pool.job_.store(nullptr);
        pool.inside_.store(0);
        pool.wanted_.store(0);
        pool.started_ = 0;
    }

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
            if (!fresh) {  // asleep until a job wants this worker (jobs without it pass by)
                std::unique_lock<std::mutex> lock(sleep_mutex_);
                wake_[index].wait(
                    lock, [&] { return epoch_.load() != seen && index < wanted_.load(); });
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
    static inline NativePool* instance_ = nullptr;  // get()'s, for after_fork

    std::mutex job_mutex_;
    std::mutex sleep_mutex_;
    std::condition_variable wake_[kMaxThreads];  // worker i sleeps on wake_[i]
    std::atomic<uint64_t> epoch_{0};
    std::atomic<Job*> job_{nullptr};
    std::atomic<int> inside_{0};
    std::atomic<int> wanted_{0};
    int started_ = 0;
};

}  // namespace graphrt_simd
