"""One parser per supported document format; :mod:`ragtrail.ingest.loaders` picks among them.

- :mod:`~ragtrail.ingest.formats.markdown`: ``.md``, ``.markdown``
- :mod:`~ragtrail.ingest.formats.text`: ``.txt``, ``.text``
- :mod:`~ragtrail.ingest.formats.html`: ``.html``, ``.htm``
- :mod:`~ragtrail.ingest.formats.pdf`: ``.pdf``
- :mod:`~ragtrail.ingest.formats.docx`: ``.docx``

:mod:`~ragtrail.ingest.formats.common` holds what they share (:class:`QuarantineError`, text
normalisation, table rendering, the section builder, the binary and UTF-8 checks). Nothing is
imported here, so importing one parser does not load the libraries the others need.
"""
