"""Portal pages, one module per area; every view is thin (reads in frontend.selectors, writes in the
owning apps' services)."""
