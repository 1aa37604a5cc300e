"""Agent loops: who speaks next and what context each role sees (registry: :mod:`.registry`)."""
