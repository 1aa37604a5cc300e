"""``earthrl view``: the episodes of a run or evaluation folder as a local web page (:mod:`.episodes` reads the
folder through the product's loaders, :mod:`.server` serves them, :mod:`.confined` keeps file requests inside it)."""
