"""Document format parsers used by :mod:`ragtrail.ingest.loaders`.

:mod:`~ragtrail.ingest.formats.common` holds what the parsers share (:class:`QuarantineError`,
text normalisation, table rendering, the section builder, the binary and UTF-8 checks).
"""
