"""One router per resource; routes are thin and call :class:`service.engine.Engine`."""
