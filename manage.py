#!/usr/bin/env python
"""Django's command-line utility for Treemeter."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# platform/ is a folder of packages, never a package: `import platform` must stay the standard library's.
for path in (ROOT / "platform", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(1, str(path))


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
