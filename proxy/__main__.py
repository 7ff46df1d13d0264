"""`python -m frugal_proxy`."""

from frugal_proxy.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
