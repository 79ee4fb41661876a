/*
 * http_assets.c — the web view's three files (web/index.html, web/app.js, web/style.css)
 * compiled into bin/configsvr with the assembler's .incbin, so the page needs no install
 * step and no file lookup at run time (http.c serves them). Each file gets its bytes
 * (`sym`) and its length (`sym_len`, computed by the assembler: C may not subtract
 * pointers to two different objects). The Makefile makes this object depend on the files.
 */
#define WEB_ASSET(sym, file)                                                             \
    __asm__(".section .rodata\n"                                                        \
            ".global " #sym "\n.type " #sym ", @object\n.balign 16\n" #sym ":\n"        \
            ".incbin \"" file "\"\n" #sym "_end:\n"                                     \
            ".balign 8\n.global " #sym "_len\n.type " #sym "_len, @object\n"            \
            #sym "_len:\n.quad " #sym "_end - " #sym "\n.previous\n")

WEB_ASSET(web_index_html, "web/index.html");
WEB_ASSET(web_app_js, "web/app.js");
WEB_ASSET(web_style_css, "web/style.css");
