"""The config schema every command reads, and its loader (YAML plus dotted overrides)."""

from cogym.core.lazy import lazy_exports

__all__ = ["Config", "default_config_path", "load_config"]
__getattr__, __dir__ = lazy_exports(__name__, {"load_config": "load", "Config": "schema", "default_config_path": "schema"}, __all__)
