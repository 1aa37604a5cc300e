"""User-facing errors: one line naming the field and the fix, exit code 2."""


class ConfigError(ValueError):
    """A bad config value, or a model/data set that has not been fetched."""
