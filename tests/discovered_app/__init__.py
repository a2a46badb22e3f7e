"""An installed app of tests/discovery_settings.py whose ``workflows`` module nothing else
imports: a worker learns its classes only by importing each app's ``workflows`` module."""
