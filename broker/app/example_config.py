"""The example clusters.yaml shipped inside the package, so the demo and `gpufed serve`'s hint work from
an installed package in any directory, not only from the repository root.

broker/app/clusters.example.yaml is a copy of the repository's clusters.example.yaml (the file users read
and copy); tests/unit/test_package_data.py keeps the two identical. Read with importlib.resources, so it
is found wherever the package is installed (a wheel in a virtualenv, the image's /opt/gpufed).
"""

from __future__ import annotations

from importlib import resources

from broker.core.errors import ConfigError

__all__ = ["EXAMPLE_NAME", "example_config_location", "example_config_text"]

EXAMPLE_NAME = "clusters.example.yaml"


def example_config_location() -> str:
    """Where the packaged example lives (a path in site-packages for a wheel, in the checkout otherwise)."""
    return str(resources.files(__package__) / EXAMPLE_NAME)


def example_config_text() -> str:
    """The packaged example's text; a ConfigError naming the file when the package was built without it."""
    try:
        return (resources.files(__package__) / EXAMPLE_NAME).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{example_config_location()}: the example config is missing from the installed package "
            f"({exc.strerror or exc}); reinstall gpufed"
        ) from None
