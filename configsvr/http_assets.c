/*
 * http_assets.c — the web view's three files (web/index.html, web/app.js, web/style.css)
 * compiled into bin/configsvr with the assembler's .incbin, so the page needs no install
 * step and no file lookup at run time (http.c serves them). Each file gets a start and an
 * end symbol; the Makefile makes this object depend on the three files.
 */
#define WEB_ASSET(sym, file)                                                             \
    __asm__(".section .rodata\n"                                                        \
            ".global " #sym "\n.type " #sym ", @object\n.balign 16\n" #sym ":\n"        \
            ".incbin \"" file "\"\n"                                                    \
            ".global " #sym "_end\n.type " #sym "_end, @object\n" #sym "_end:\n"        \
            ".byte 0\n.previous\n")

WEB_ASSET(web_index_html, "web/index.html");
WEB_ASSET(web_app_js, "web/app.js");
WEB_ASSET(web_style_css, "web/style.css");
