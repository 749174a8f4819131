"""The version of ragguard, in one place (config files record it)."""

__version__ = "0.1.0"
