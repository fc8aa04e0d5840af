from django.urls import path

from .api import PackageDetailView, PackageListView
from .model_prices_api import ModelPriceExportView, ModelPriceImportView, ModelPriceListView

urlpatterns = [
    path("packages", PackageListView.as_view(), name="package-list"),
    path("packages/<str:code>", PackageDetailView.as_view(), name="package-detail"),
    path("catalog/model-prices", ModelPriceListView.as_view(), name="model-price-list"),
    path("catalog/model-prices/export", ModelPriceExportView.as_view(), name="model-price-export"),
    path("catalog/model-prices/import", ModelPriceImportView.as_view(), name="model-price-import"),
]
