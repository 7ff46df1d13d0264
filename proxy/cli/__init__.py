"""The `frugal-proxy` commands."""
