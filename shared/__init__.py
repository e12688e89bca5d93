"""The pure core. Its hot modules may be imported compiled by mypyc: ``native`` says when."""

from replywire.native import package_path

__path__ = package_path(__path__, __name__)
