"""TileLang's module path ``tilelang.carver`` — only its device queries
(``from tilelang.carver.arch import driver``; ``driver.get_num_sms()`` ...), which TileLang
programs use to size persistent grids.  TileLang's carver templates and roller (its search over
tile configurations) are not part of tilewright: use ``tilewright.autotune``."""
