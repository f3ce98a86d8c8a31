"""specmodel: will a speculative-decoding drafter pay off on this hardware, and why."""

__version__ = "0.1.0"
