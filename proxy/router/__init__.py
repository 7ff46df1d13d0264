"""One client's router: handshakes, the merged catalog, routes, the request dispatch."""
