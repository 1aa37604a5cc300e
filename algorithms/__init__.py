"""EarthRL algorithms."""
