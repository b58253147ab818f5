#include "lora/apply.h"
