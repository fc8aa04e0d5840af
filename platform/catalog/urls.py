from django.urls import path

from .api import PackageDetailView, PackageListView

urlpatterns = [
    path("packages", PackageListView.as_view(), name="package-list"),
    path("packages/<str:code>", PackageDetailView.as_view(), name="package-detail"),
]
