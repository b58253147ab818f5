// Part of issue 20 (tests land with their part).
#include <gtest/gtest.h>
