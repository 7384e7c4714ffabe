"""Labels of the synthetic world in English and Chinese, and the view context that picks one.

Why: a screen in Chinese must have the same layout and the same semantics as its English twin, so
apps never hold display strings in their state; they name strings by key and the `ViewContext`
translates them when a view is built. Missing translations are errors, not silent fallbacks.
"""

from __future__ import annotations

from dataclasses import dataclass

from venus_core.data.synth.widgets import Lang, SynthPlatform

STRINGS: dict[str, tuple[str, str]] = {
    # launcher / apps
    "app.settings": ("Settings", "设置"),
    "app.messages": ("Messages", "信息"),
    "app.shop": ("Shop", "商城"),
    "app.form": ("Sign Up", "注册"),
    "app.board": ("Board", "面板"),
    "app.launcher": ("Home", "主屏幕"),
    "back": ("Back", "返回"),
    "home": ("Home", "首页"),
    "ok": ("OK", "确定"),
    "cancel": ("Cancel", "取消"),
    "save": ("Save", "保存"),
    "delete": ("Delete", "删除"),
    "search": ("Search", "搜索"),
    "more": ("More", "更多"),
    # settings
    "set.wifi": ("Wi-Fi", "无线网络"),
    "set.bluetooth": ("Bluetooth", "蓝牙"),
    "set.airplane": ("Airplane mode", "飞行模式"),
    "set.location": ("Location", "位置信息"),
    "set.notifications": ("Notifications", "通知"),
    "set.display": ("Display", "显示"),
    "set.sound": ("Sound", "声音"),
    "set.battery": ("Battery", "电池"),
    "set.language": ("Language", "语言"),
    "set.about": ("About phone", "关于手机"),
    "set.dark_mode": ("Dark mode", "深色模式"),
    "set.brightness": ("Brightness", "亮度"),
    "set.font_size": ("Font size", "字体大小"),
    "set.font.small": ("Small", "小"),
    "set.font.default": ("Default", "默认"),
    "set.font.large": ("Large", "大"),
    "set.volume": ("Volume", "音量"),
    "set.vibrate": ("Vibrate", "振动"),
    "set.battery_saver": ("Battery saver", "省电模式"),
    "set.lang.en": ("English", "英语"),
    "set.lang.zh": ("Chinese", "中文"),
    "set.lang.fr": ("French", "法语"),
    "set.model": ("Model", "型号"),
    "set.version": ("Version", "版本"),
    "set.airplane_confirm": ("Turn on airplane mode?", "开启飞行模式？"),
    "set.increase": ("Increase", "增加"),
    "set.decrease": ("Decrease", "减少"),
    # messages
    "msg.chats": ("Chats", "聊天"),
    "msg.contacts": ("Contacts", "联系人"),
    "msg.new_contact": ("New contact", "新建联系人"),
    "msg.name": ("Name", "姓名"),
    "msg.phone": ("Phone", "电话"),
    "msg.type_message": ("Type a message", "输入消息"),
    "msg.send": ("Send", "发送"),
    "msg.pin": ("Pin", "置顶"),
    "msg.delete_chat": ("Delete chat?", "删除聊天？"),
    "msg.no_messages": ("No messages yet", "暂无消息"),
    "msg.add": ("Add contact", "添加联系人"),
    # shop
    "shop.search_hint": ("Search products", "搜索商品"),
    "shop.cart": ("Cart", "购物车"),
    "shop.add": ("Add", "加入"),
    "shop.add_to_cart": ("Add to cart", "加入购物车"),
    "shop.checkout": ("Checkout", "结算"),
    "shop.total": ("Total", "合计"),
    "shop.empty_cart": ("Your cart is empty", "购物车是空的"),
    "shop.remove": ("Remove", "移除"),
    "shop.order_placed": ("Order placed", "下单成功"),
    "shop.place_order": ("Place order?", "确认下单？"),
    "shop.cat.all": ("All", "全部"),
    "shop.cat.fruit": ("Fruit", "水果"),
    "shop.cat.tech": ("Tech", "数码"),
    "shop.cat.home": ("Home", "家居"),
    "shop.no_results": ("No results", "无结果"),
    "shop.qty": ("Qty", "数量"),
    # form
    "form.title": ("Create account", "创建账户"),
    "form.name": ("Full name", "姓名"),
    "form.email": ("Email", "邮箱"),
    "form.city": ("City", "城市"),
    "form.country": ("Country", "国家"),
    "form.agree": ("I agree to the terms", "我同意条款"),
    "form.newsletter": ("Newsletter", "订阅通讯"),
    "form.submit": ("Submit", "提交"),
    "form.done": ("Account created", "账户已创建"),
    "form.choose_country": ("Choose a country", "选择国家"),
    "form.reset": ("Reset", "重置"),
    # board (curriculum)
    "board.title": ("Buttons", "按钮"),
    # colours
    "color.red": ("red", "红色"),
    "color.green": ("green", "绿色"),
    "color.blue": ("blue", "蓝色"),
    "color.yellow": ("yellow", "黄色"),
    "color.purple": ("purple", "紫色"),
    "color.orange": ("orange", "橙色"),
    "color.pink": ("pink", "粉色"),
    "color.teal": ("teal", "青色"),
    "color.gray": ("gray", "灰色"),
}

# Named colours used where the colour itself is the cue (curriculum board, app icons).
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 50, 47),
    "green": (46, 160, 67),
    "blue": (38, 110, 220),
    "yellow": (235, 200, 30),
    "purple": (140, 70, 200),
    "orange": (240, 130, 20),
    "pink": (230, 90, 170),
    "teal": (20, 160, 160),
    "gray": (128, 128, 128),
}


def tr(key: str, lang: Lang) -> str:
    """The string `key` in `lang` (KeyError naming the key when it is missing)."""
    try:
        en, zh = STRINGS[key]
    except KeyError:
        raise KeyError(f"synthetic world: no string {key!r} in i18n.STRINGS") from None
    if lang == "en":
        return en
    if lang == "zh":
        return zh
    raise ValueError(f"synthetic world: unknown language {lang!r} (expected 'en' or 'zh')")


MOBILE_WIDTH = 360
WEB_WIDTH = 720


@dataclass(frozen=True)
class ViewContext:
    """What a view depends on besides the app state: platform, language and logical size.

    The logical width is fixed per platform (mobile 360, web 720) and the height follows the
    aspect ratio of the requested output image, so text keeps its proportions at any output size
    (a square 128x128 output gives a 360x360 "phone"): squashing a 360x640 layout into a square
    would make the small curriculum images unreadable.
    """

    platform: SynthPlatform = "mobile"
    lang: Lang = "en"
    width: int = MOBILE_WIDTH
    height: int = 640

    def __post_init__(self) -> None:
        if self.platform not in ("mobile", "web"):
            raise ValueError(f"ViewContext.platform: {self.platform!r} is not 'mobile' or 'web'")
        if self.lang not in ("en", "zh"):
            raise ValueError(f"ViewContext.lang: {self.lang!r} is not 'en' or 'zh'")
        if self.width < 200 or self.height < 200:
            raise ValueError(f"ViewContext: logical size {self.width}x{self.height} below 200x200")

    @classmethod
    def for_output(cls, platform: SynthPlatform, lang: Lang, out_w: int, out_h: int) -> ViewContext:
        if out_w <= 0 or out_h <= 0:
            raise ValueError(f"output size {out_w}x{out_h} must be positive")
        width = MOBILE_WIDTH if platform == "mobile" else WEB_WIDTH
        height = max(200, round(width * out_h / out_w))
        return cls(platform=platform, lang=lang, width=width, height=height)

    def t(self, key: str) -> str:
        return tr(key, self.lang)
