"""Unit tests of the command line (ragtrail.cli), one file per module where it has any."""
