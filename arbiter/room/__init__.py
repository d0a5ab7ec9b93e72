"""The local room: a web page served by the arbiter where a person chats with the personas, watches the pool's
level move and tunes the channel. Plain static files (no build step), a small JSON API and the /v1 event stream.
"""

from arbiter.room.routes import add_room, human_id, is_loopback_host

__all__ = ("add_room", "human_id", "is_loopback_host")
