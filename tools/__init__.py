"""Developer and build tooling for Treemeter (not imported by the platform)."""
