"""cogym.core: the small types every other cogym package may import (errors, the end-of-game
facts a game reports). It imports no other cogym package."""
