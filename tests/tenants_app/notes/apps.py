from django.apps import AppConfig


class NotesConfig(AppConfig):
    name = "tests.tenants_app.notes"
    label = "notes"
