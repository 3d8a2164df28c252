"""Console pages of the runs app (one module per page); actions live in
``runs.views.actions``. Every view renders the full page or, for htmx requests, its
fragment from ``templates/partials/``."""
