"""``train-reranker``: a second-stage scorer trained from the eval set's own labels."""
