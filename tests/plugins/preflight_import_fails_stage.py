"""A plugin that raises at import (not an ImportError): launch must say so in one line and exit 2."""

raise ValueError("planted import-time failure in a plugin")
