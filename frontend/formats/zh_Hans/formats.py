"""Simplified Chinese formats for the portal: Django's, with amounts grouped by thousands ("1,234.50"),
as Chinese invoices (发票) and bank statements print them. Django's own leaves amounts ungrouped."""

from django.conf.locale.zh_Hans.formats import *  # noqa: F403 - extend Django's zh_Hans formats

THOUSAND_SEPARATOR = ","
NUMBER_GROUPING = 3
