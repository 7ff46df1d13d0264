"""One client's view of each upstream: era translation, MRTR, listen streams, the downstream peer."""
