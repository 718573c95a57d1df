"use strict";(self.rspackChunk_dsportal_tensorboard=self.rspackChunk_dsportal_tensorboard||[]).push([[700],{646(e,t,r){var o=r(601),n=r.n(o),a=r(314),i=(r.n(a))()(n());i.push([e.id,`.jp-portal-tensorboard-panel {
  display: flex;
  flex-direction: column;
  min-width: 200px;
  overflow: auto;
  background: var(--jp-layout-color1);
  color: var(--jp-ui-font-color1);
  font-size: var(--jp-ui-font-size1);
}

.jp-portal-tensorboard-panel > header {
  flex: 0 0 auto;
  padding: 8px 12px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
  font-size: var(--jp-ui-font-size0);
  font-weight: 600;
  letter-spacing: 1px;
  text-transform: uppercase;
}

.jp-portal-tensorboard-status {
  margin: 8px 12px;
  color: var(--jp-ui-font-color2);
}

.jp-portal-tensorboard-status:empty {
  display: none;
}

.jp-portal-tensorboard-list {
  margin: 0;
  padding: 0;
  list-style: none;
}

.jp-portal-tensorboard-item {
  display: flex;
  align-items: center;
  gap: 8px;
  padding: 4px 12px;
}

.jp-portal-tensorboard-item:hover {
  background: var(--jp-layout-color2);
}

.jp-portal-tensorboard-logdir {
  flex: 1 1 auto;
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
  font-family: var(--jp-code-font-family);
}

.jp-portal-tensorboard-open {
  color: var(--jp-content-link-color);
}

.jp-portal-tensorboard-stop.jp-mod-styled {
  height: 24px;
  padding: 0 8px;
  line-height: 24px;
}
`,""]),r.d(t,{},{A:i})},314(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var r="",o=void 0!==t[5];return t[4]&&(r+="@supports (".concat(t[4],") {")),t[2]&&(r+="@media ".concat(t[2]," {")),o&&(r+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),r+=e(t),o&&(r+="}"),t[2]&&(r+="}"),t[4]&&(r+="}"),r}).join("")},t.i=function(e,r,o,n,a){"string"==typeof e&&(e=[[null,e,void 0]]);var i={};if(o)for(var s=0;s<this.length;s++){var p=this[s][0];null!=p&&(i[p]=!0)}for(var c=0;c<e.length;c++){var l=[].concat(e[c]);o&&i[l[0]]||(void 0!==a&&(void 0===l[5]||(l[1]="@layer".concat(l[5].length>0?" ".concat(l[5]):""," {").concat(l[1],"}")),l[5]=a),r&&(l[2]&&(l[1]="@media ".concat(l[2]," {").concat(l[1],"}")),l[2]=r),n&&(l[4]?(l[1]="@supports (".concat(l[4],") {").concat(l[1],"}"),l[4]=n):l[4]="".concat(n)),t.push(l))}},t}},601(e){e.exports=function(e){return e[1]}},72(e){var t=[];function r(e){for(var r=-1,o=0;o<t.length;o++)if(t[o].identifier===e){r=o;break}return r}function o(e,o){for(var n={},a=[],i=0;i<e.length;i++){var s=e[i],p=o.base?s[0]+o.base:s[0],c=n[p]||0,l="".concat(p," ").concat(c);n[p]=c+1;var u=r(l),d={css:s[1],media:s[2],sourceMap:s[3],supports:s[4],layer:s[5]};if(-1!==u)t[u].references++,t[u].updater(d);else{var f=function(e,t){var r=t.domAPI(t);return r.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&r.update(e=t):r.remove()}}(d,o);o.byIndex=i,t.splice(i,0,{identifier:l,updater:f,references:1})}a.push(l)}return a}e.exports=function(e,n){var a=o(e=e||[],n=n||{});return function(e){e=e||[];for(var i=0;i<a.length;i++){var s=r(a[i]);t[s].references--}for(var p=o(e,n),c=0;c<a.length;c++){var l=r(a[c]);0===t[l].references&&(t[l].updater(),t.splice(l,1))}a=p}}},659(e){var t={};e.exports=function(e,r){var o=function(e){if(void 0===t[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}t[e]=r}return t[e]}(e);if(!o)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");o.appendChild(r)}},540(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},56(e,t,r){e.exports=function(e){var t=r.nc;t&&e.setAttribute("nonce",t)}},206(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(r){var o,n,a;o="",r.supports&&(o+="@supports (".concat(r.supports,") {")),r.media&&(o+="@media ".concat(r.media," {")),(n=void 0!==r.layer)&&(o+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),o+=r.css,n&&(o+="}"),r.media&&(o+="}"),r.supports&&(o+="}"),(a=r.sourceMap)&&"u">typeof btoa&&(o+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(o,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},959(e,t,r){var o=r(72),n=r.n(o),a=r(206),i=r.n(a),s=r(659),p=r.n(s),c=r(56),l=r.n(c),u=r(540),d=r.n(u),f=r(113),v=r.n(f),m=r(646),h={};h.styleTagTransform=v(),h.setAttributes=l(),h.insert=p().bind(null,"head"),h.domAPI=i(),h.insertStyleElement=d(),n()(m.A,h),m.A&&m.A.locals&&m.A.locals}}]);