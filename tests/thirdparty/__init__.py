"""Real third-party packages on ArcatureBackend: Wagtail and django-modelsearch.

Collected only in the ``*-thirdparty-*`` tox environments (ARCATURE_THIRDPARTY=1),
which install those packages; the main suite never imports this folder.
"""
