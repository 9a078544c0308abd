"""ragtrail: keeps RAG systems honest every night."""

__version__ = "0.1.0"
