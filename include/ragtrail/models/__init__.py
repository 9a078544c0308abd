"""Model files on local disk: the shared cache and S3 mirror (:mod:`ragtrail.models.store`)."""
