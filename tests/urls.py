from django.contrib import admin
from django.urls import path

from django_arcature.contrib.prometheus.views import metrics

urlpatterns = [path("admin/", admin.site.urls), path("metrics", metrics)]
