"""Research tools apart from the training path: paper claims in miniature (``cogym reproduce``)
and the script that rebuilds the embedded tiny models."""
