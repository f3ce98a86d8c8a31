"""One module per CLI command; each parses flags, calls the library, prints."""
