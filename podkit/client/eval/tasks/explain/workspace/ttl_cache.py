"""A small in-memory cache whose entries expire."""

import time
from collections import OrderedDict


class TTLCache:
    def __init__(self, max_size=128, ttl=60.0, clock=time.monotonic):
        self.max_size, self.ttl, self.clock = max_size, ttl, clock
        self._data = OrderedDict()

    def put(self, key, value):
        self._purge()
        self._data[key] = (self.clock() + self.ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_size:
            self._data.popitem(last=False)

    def get(self, key, default=None):
        item = self._data.get(key)
        if item is None or item[0] <= self.clock():
            self._data.pop(key, None)
            return default
        self._data.move_to_end(key)
        return item[1]

    def _purge(self):
        now = self.clock()
        for key in [k for k, (expires, _) in self._data.items() if expires <= now]:
            del self._data[key]
