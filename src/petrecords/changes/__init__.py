"""The change log as the outside sees it: a change's wire form and cursor, the feed, the live hub and its streams,
retention and the NATS publisher; reminders and webhooks are told from the same log."""
