"""The path of every tools/call and the one place that assembles it."""
