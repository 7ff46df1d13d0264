"""The HTTP face: the Streamable HTTP endpoint, sessions, guard, operators, metrics."""
