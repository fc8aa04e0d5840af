"""What every platform package may use: the API error shape, fields, filters, pagination, the JSON
parser, COPY inserts and the PDF font. Imports nothing of the platform itself."""
