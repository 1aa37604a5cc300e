"""EarthRL rollout."""
