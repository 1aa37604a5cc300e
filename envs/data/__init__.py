"""The data layer under every other envs sub-package: ``catalog`` (scenes and bands on disk),
``calibration`` (Landsat MTL metadata, DN → reflectance/temperature), ``artifacts`` (an episode's
named outputs, ToolError) and ``workspace_fs`` (link-safe workspace reads and writes). Imports no
other envs sub-package."""
