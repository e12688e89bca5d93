"""``python -m native``: which build of the hot modules this interpreter imports."""

from replywire.native import running

print(running().describe())
