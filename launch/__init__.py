"""EarthRL launch."""
