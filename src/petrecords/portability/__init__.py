"""Data in and out (contract section 13): export and import as JSON Lines, moving in from Whoof, and backup and
restore of the SQLite database. Generic over the registered resources: a new resource or field is exported and
imported from its declaration."""
