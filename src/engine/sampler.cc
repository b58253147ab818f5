// placeholder: replaced by the module implementation
