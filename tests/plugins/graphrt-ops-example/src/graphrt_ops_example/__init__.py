"""A third-party plugin as a user would publish one: custom-domain operators for tests."""
