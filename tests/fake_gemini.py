"""Moved: the fake Gemini server is ``harness/fake_gemini.py`` (``python -m harness.fake_gemini``).

The README's walkthrough still says ``python -m tests.fake_gemini``; this runs the same
server until the README names ``harness.fake_gemini``. Then delete this file.
"""

import sys

from harness.fake_gemini import main

if __name__ == "__main__":
    sys.exit(main())
