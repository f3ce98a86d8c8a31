"""The go/no-go report: content assembly (no plotting) and its PDF / Markdown / JSON renderings."""
