"""The preStop hooks of the compared strategies, as an operator would write them."""
