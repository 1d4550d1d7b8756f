from django.apps import AppConfig


class SmokeAppConfig(AppConfig):
    name = "smoke_app"
